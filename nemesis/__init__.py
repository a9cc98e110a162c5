"""Faults: partition shapes (pure maths), iptables/tc command builders (pure), process faults, schedules."""
