"""Workload layer: model specs (config.json, presets, explicit numbers), job specs, traces."""
