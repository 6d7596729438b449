"""The nemesis soak: random job operations and random, overlapping faults on a real cluster, then one checker.

``history`` is the record every part writes and the checker reads; ``checker``
is pure; ``generator`` drives the API; ``nemesis`` applies and heals faults;
``test_soak`` runs them together (``make soak`` for a long run).
"""
