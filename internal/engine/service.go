package engine

import "context"

// service is one of the engine's components with its own goroutines (the
// claimer, the completer, the leaser, the maintenance services), after
// River's start/stop contract:
//
//   - Start launches the service's goroutines and returns at once; it fails
//     only before anything was launched. ctx ends the service as Stop does.
//   - Stop asks the goroutines to end and returns once they have; calling it
//     on a service never started, or twice, is a no-op.
//
// A service is started once.
type service interface {
	Start(ctx context.Context) error
	Stop()
}
