"""A second built-in workload, in another domain: an IT helpdesk (accounts, MFA, VPN, quotas, software).

It exists to show that evolution works for agents other than the support desk, and it is built
only through the workload plugin interface (`plugin.workload`, entry point `it_helpdesk`).
"""
