"""The consumer's guard: run each slot's effect once downstream, and refuse a deposed leader's messages."""
