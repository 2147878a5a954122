"""Metrics and scoring, shared by training and inference."""
