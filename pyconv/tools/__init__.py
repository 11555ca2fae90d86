"""The command-line tools behind tasks.py: milestones, profile, sanitize, train (and the /usr/bin/time log)."""
