"""What every long-lived part of a node shares: the lifeline that reports a thread's death, group commit, and the crash points the fault tests use."""
