"""Benchmarks: speed measured as ratios side by side (engine, runner, matcher, Ray, overhead). Above the pipeline, never imported by it."""
