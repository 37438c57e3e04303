"""Tests of the RDMAP core."""
