"""Shared web fixtures (sandbox server, browser env); owned by the sandbox area."""
