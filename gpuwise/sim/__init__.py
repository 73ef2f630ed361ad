"""Simulated time: one discrete-event engine shared by the cluster scheduler simulator and the
pay-per-use cloud rental simulator (an unbounded cloud is one kind of cluster)."""
