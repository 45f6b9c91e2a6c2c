"""Making and checking patch sets on a local checkout (gitpython): `patch new` from uncommitted changes or a
commit range, and the dry patch check behind `validate --against` and `patch check`."""
