"""Tests of the face (engine, api, config, errors, progress, stats), layout and surface."""
