"""The command-line tools behind tasks.py: milestones, profile, sanitize, train (and the /usr/bin/time log);
grade and leaderboard (the teachers' grading, on pyconv.grading)."""
