"""Running attempts: one attempt from the controller's side (`runner`), sweeps over hosts (`scheduler`,
with `health` for hosts that stop answering), the agent's report turned into a `Record` (`recording`), and
what a resumed sweep runs on (`resume`)."""
