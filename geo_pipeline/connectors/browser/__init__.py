"""The browser lane's connector (``protocol: browser``): one module per consumer chat app
(deepseek.py, doubao.py, kimi.py: selectors and frame parsers), the accounts it leases
(accounts.py) and the Playwright driver (connector.py). Playwright is imported only when a
browser is started, so importing this package costs nothing elsewhere."""
