"""The command line: the typer app (`entry.main` is the `harness` script), one module per group of commands,
what they show (`views`), live progress, and how errors become exit codes (`exits`). The only package that
prints to a terminal or exits."""
