"""Reaching a host: one transport interface (SSH and local), targets from the inventory, the agent zipapp
shipped once per content, the GPUs a host has, and Slurm (a cluster as a transport: the attempt as a batch
job)."""
