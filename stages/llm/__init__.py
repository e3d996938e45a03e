"""Clients for model endpoints used by model-in-the-loop stages (the reward judge first)."""
