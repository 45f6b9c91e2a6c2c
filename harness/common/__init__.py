"""Standard-library-only code both halves import: the controller–agent protocol, the patch path rule, how a
source tree names its SGLang (`targetid`) and a file's sha256 (`filehash`).
Shipped inside the agent's zipapp with `harness/agent/`, so nothing here may import outside the standard
library or the rest of the controller."""
