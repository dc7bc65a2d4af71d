"""Suite-wide pytest hooks."""


def pytest_sessionfinish(session, exitstatus):
    # A run that collected nothing must fail loudly: exit code 5 would otherwise read as "no tests".
    if exitstatus == 5:
        session.exitstatus = 1
