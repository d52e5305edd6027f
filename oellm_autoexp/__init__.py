"""oellm-autoexp: keeps large GPU training runs alive on Slurm clusters."""

__version__ = "0.1.0"
