"""Environments behind one functional, gymnax-compatible protocol."""

from .base import AbstractEnv as AbstractEnv
