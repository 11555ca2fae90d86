"""`invoke report`: tables and plots generated from the bench's JSON files."""
