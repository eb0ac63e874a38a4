"""Agent environments, one small file each: the Python sandbox and the environments of the agent
benchmarks (MedCalc-Bench with tools, AgentClinic, MedAgentBench)."""
