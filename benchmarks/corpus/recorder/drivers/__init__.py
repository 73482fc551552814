"""One driver per dialect: runs a framework-neutral :class:`~recorder.script.Scenario` in a framework."""

DIALECTS = ("langgraph_openinference", "langgraph_langsmith", "openai_agents", "pydantic_ai", "strands",
            "smolagents")
