"""The audit: does the tick store hold exactly one row per owed slot, written under a current fence."""
