"""Reaching a host: one transport interface (SSH and local), targets from the inventory, the attempt channel
(typed words to and from one attempt's agent: JSON lines on a process, or a Slurm batch job), the agent
zipapp shipped once per content, the GPUs a host has, and Slurm."""
