"""Delayed-network trials: how well does compensation cancel a round-trip delay?"""
