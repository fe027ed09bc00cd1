"""Writing the agent strategy's plans offline: candidate plans from the graph's paths,
scored on judged training questions, kept per question category."""
