"""Tests of the composed stack and its adapters."""
