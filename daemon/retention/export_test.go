package retention

// LockName is lockName, for tests that hold the lock as a cleaner would.
const LockName = lockName
