"""Reconstruction of private quantities from transcripts (PDMM observables, …)."""
