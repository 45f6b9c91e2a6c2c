"""What the user asks for, read once at the door: hosts.yaml and experiment/sweep YAML as frozen models
(with file:line errors), the backend registry, patch sets, an experiment resolved into its backend and
patches, the command lines it runs, the attempt `Spec`, and a sweep's plan. Pure, apart from reading files."""
