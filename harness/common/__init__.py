"""Standard-library-only code both halves import: the controller–agent protocol and the patch path rule.
Shipped inside the agent's zipapp with `harness/agent/`, so nothing here may import outside the standard
library or the rest of the controller."""
