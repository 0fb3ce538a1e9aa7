"""`make bench`: kjbod's benchmarks, each printed as a ratio against a peer or a limit measured in the same run."""
