"""What Inspect AI's ``inspect_ai`` entry point loads (pyproject.toml,
``[project.entry-points.inspect_ai]``): importing it registers ``layerlab/fault_matrix``, so
``inspect eval layerlab/fault_matrix`` finds the task in an installed layerlab."""

from layerlab.integrations.inspect.task import fault_matrix

__all__ = ["fault_matrix"]
