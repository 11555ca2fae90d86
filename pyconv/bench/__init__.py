"""`invoke bench`: the benchmark and its JSON records."""
