package manager

// DrainThenStop is drainThenStop, for the external tests.
var DrainThenStop = drainThenStop

// The tests run the manager several times in one process.
func init() { controllerOptions.SkipNameValidation = new(true) }
