package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Deployment states. A deployment is created provisioning, moves freely
// between provisioning, starting and ready as its operator reports, and
// ends stopped: stopped is terminal (the only way on is delete and
// re-create under the same id).
const (
	DeploymentProvisioning = "provisioning"
	DeploymentStarting     = "starting"
	DeploymentReady        = "ready"
	DeploymentStopped      = "stopped"
)

// ErrDeploymentStopped refuses a state change of a stopped deployment.
var ErrDeploymentStopped = errors.New("storage: deployment is stopped")

// Deployment is one serverless deployment: a customer's own surface,
// addressed as <id>.<domain> or under /deployment/<id>.
type Deployment struct {
	// ID is a DNS label (see ValidDeploymentID).
	ID string
	// AccountID owns the deployment and everything submitted through it.
	AccountID string
	// Pool names the worker pool its jobs run on.
	Pool string
	// Public marks the public demo: it takes callers with no credential.
	Public bool
	// State is provisioning, starting, ready or stopped.
	State     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ValidDeploymentState reports whether s is one of the four states.
func ValidDeploymentState(s string) bool {
	switch s {
	case DeploymentProvisioning, DeploymentStarting, DeploymentReady, DeploymentStopped:
		return true
	}
	return false
}

// ValidDeploymentID reports whether id is a DNS label: 1 to 63 lower-case
// letters, digits and '-', neither starting nor ending with '-'.
func ValidDeploymentID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] == '-' || id[len(id)-1] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// CheckDeployment refuses a deployment no backend may hold: a bad id, no
// owner or pool, an unknown state.
func CheckDeployment(d Deployment) error {
	switch {
	case !ValidDeploymentID(d.ID):
		return fmt.Errorf("storage: deployment id %q is not a DNS label", d.ID)
	case d.AccountID == "" || d.Pool == "":
		return errors.New("storage: a deployment needs an account and a pool")
	case !ValidDeploymentState(d.State):
		return fmt.Errorf("storage: unknown deployment state %q", d.State)
	}
	return nil
}

// DeploymentStore keeps the deployment registry. Every write is durable
// before it returns.
type DeploymentStore interface {
	// CreateDeployment records d (ID, AccountID, Pool, Public and State
	// are the caller's; the times are the store's) and returns it as
	// stored. ErrDuplicate when the id is taken.
	CreateDeployment(ctx context.Context, d Deployment) (Deployment, error)
	// GetDeployment returns the deployment, or ErrNotFound.
	GetDeployment(ctx context.Context, id string) (Deployment, error)
	// ListDeployments lists an account's deployments (every deployment
	// when accountID is empty), oldest first.
	ListDeployments(ctx context.Context, accountID string) ([]Deployment, error)
	// SetDeploymentState changes the state and UpdatedAt and returns the
	// deployment. A stopped deployment answers ErrDeploymentStopped for
	// any state but stopped (stopping twice is a no-op); ErrNotFound when
	// it does not exist.
	SetDeploymentState(ctx context.Context, id, state string) (Deployment, error)
	// DeleteDeployment removes the record (its jobs and assets stay until
	// their retention); ErrNotFound when it does not exist.
	DeleteDeployment(ctx context.Context, id string) error
}
