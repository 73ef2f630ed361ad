"""The controller shared by the simulator and the Ray runtime (issue 12): one control loop over a
`Clock` and an `Actuator`, between the policies and the backends that move jobs."""
