"""Prescient teleoperation: act on predicted operator commands to cancel the round trip."""
