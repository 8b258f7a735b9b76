"""Policies, teachers, reflectors and judges."""
