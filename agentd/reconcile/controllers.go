package reconcile

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/deploysync/deploysync/agentd/kube"
	"github.com/deploysync/deploysync/rpc"
	ctrlv1 "github.com/deploysync/deploysync/rpc/ctrlv1"
)

// kinds is the registry: every kind of resource the agent applies, each
// declared once. Nothing else in agentd names a kind; the agent finds a
// resource's controller here by the kind rpc.ResourceOf gives it.
var kinds = []kind{
	spec[*ctrlv1.DeploymentState]{
		name:  rpc.KindDeployment,
		label: kube.DeploymentLabel,
		state: func(ev *ctrlv1.DeploymentChangeEvent) *ctrlv1.DeploymentState {
			return ev.GetDeployment().GetDeployment()
		},
		at:    deploymentAt,
		build: func(d Deps) typed[*ctrlv1.DeploymentState] { return NewDeployments(d.Kube, d.Cache, d.Namespaces) },
	},
	spec[*ctrlv1.SentinelState]{
		name:  rpc.KindSentinel,
		label: kube.SentinelLabel,
		state: func(ev *ctrlv1.DeploymentChangeEvent) *ctrlv1.SentinelState { return ev.GetSentinel().GetSentinel() },
		at:    sentinelAt,
		build: func(d Deps) typed[*ctrlv1.SentinelState] { return NewSentinels(d.Kube, d.Cache, d.Namespaces) },
	},
	spec[*ctrlv1.CiliumNetworkPolicyState]{
		name:  rpc.KindCiliumNetworkPolicy,
		label: kube.PolicyLabel,
		state: func(ev *ctrlv1.DeploymentChangeEvent) *ctrlv1.CiliumNetworkPolicyState {
			return ev.GetCiliumNetworkPolicy().GetCiliumNetworkPolicy()
		},
		at:    policyAt,
		build: func(d Deps) typed[*ctrlv1.CiliumNetworkPolicyState] { return NewPolicies(d.Dynamic, d.Namespaces) },
	},
}

// Controller applies the resources of one kind to the cluster.
type Controller interface {
	// Kind is the kind it applies (rpc.Kind*).
	Kind() string
	// Apply makes the cluster run the resource as ev, an apply event of
	// the kind, describes it.
	Apply(ctx context.Context, ev *ctrlv1.DeploymentChangeEvent) error
	// Delete removes the resource's managed objects wherever they are.
	Delete(ctx context.Context, id string) error
	// Present lists the kind's managed objects in the cluster, for
	// garbage collection after a full sync.
	Present(ctx context.Context) ([]Placed, error)
}

// Deps is what the controllers are built from.
type Deps struct {
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface // for CiliumNetworkPolicies
	Cache      *Cache
	Namespaces *Namespaces
}

// Controllers holds one controller per kind of the registry.
type Controllers struct {
	all        []Controller // in the registry's order
	byKind     map[string]Controller
	namespaces *Namespaces
}

// NewControllers builds the controller of every kind.
func NewControllers(d Deps) *Controllers {
	cs := &Controllers{byKind: map[string]Controller{}, namespaces: d.Namespaces}
	for _, k := range kinds {
		c := k.controller(d)
		cs.all = append(cs.all, c)
		cs.byKind[k.kindName()] = c
	}
	return cs
}

// For returns the controller of kind, if the agent applies that kind.
func (cs *Controllers) For(kind string) (Controller, bool) {
	c, ok := cs.byKind[kind]
	return c, ok
}

// Present lists the resources with managed objects in the cluster, for
// garbage collection, kind by kind: a kind that cannot be listed (say,
// policies the agent may not list) is reported in the error and left out,
// and must not keep the other kinds' garbage, a stopped deployment still
// running, uncollected. Objects in namespaces that are not the agent's
// (Namespaces.Owns) do not count: garbage collection never deletes them
// (see deleteEach), so listing them would only make every full sync
// delete nothing again. Where ownership cannot be told now, the object
// counts, and the delete asks again.
func (cs *Controllers) Present(ctx context.Context) ([]rpc.Resource, error) {
	var present []rpc.Resource
	var errs []error
	for _, c := range cs.all {
		placed, err := c.Present(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list managed %s objects: %w", c.Kind(), err))
			continue
		}
		for _, p := range placed {
			if owned, err := cs.namespaces.Owns(ctx, p.Namespace); err == nil && !owned {
				continue
			}
			present = append(present, rpc.Resource{Kind: c.Kind(), ID: p.ID})
		}
	}
	return present, errors.Join(errs...)
}

// Owners names the resources an informer event's object belongs to, by
// its ID labels (see kube.LabelsOf). It is for the cache's workload
// objects: a CiliumNetworkPolicy, which no informer watches, carries its
// deployment's label as a reference, not as that deployment's object.
func Owners(obj any) []rpc.Resource {
	var owners []rpc.Resource
	labels := kube.LabelsOf(obj)
	for _, k := range kinds {
		if id := labels[k.idLabel()]; id != "" {
			owners = append(owners, rpc.Resource{Kind: k.kindName(), ID: id})
		}
	}
	return owners
}

// LeftBehind reports whether o, an object of the resource that ev applies,
// is somewhere else than where that apply puts the resource's objects:
// left behind by a move. An event of no kind the agent applies places
// nothing, so it reports false.
func LeftBehind(ev *ctrlv1.DeploymentChangeEvent, o metav1.Object) bool {
	r, _, ok := rpc.ResourceOf(ev)
	if !ok {
		return false
	}
	for _, k := range kinds {
		if k.kindName() == r.Kind {
			return !k.placeOf(ev).holds(o)
		}
	}
	return false
}

// kind is one entry of the registry, whatever state its events carry.
type kind interface {
	kindName() string // rpc.Kind*
	idLabel() string  // the label that carries a resource's ID on its objects
	// placeOf is where applying ev, an apply event of the kind, puts the
	// resource's objects.
	placeOf(ev *ctrlv1.DeploymentChangeEvent) at
	controller(Deps) Controller
}

// spec declares a kind whose events carry state S.
type spec[S any] struct {
	name, label string
	// state is the desired state an event of the kind carries.
	state func(*ctrlv1.DeploymentChangeEvent) S
	// at is where applying a state puts the resource's objects: the same
	// function the kind's Apply asks, so LeftBehind and the applies cannot
	// disagree.
	at func(S) at
	// build makes the kind's controller.
	build func(Deps) typed[S]
}

// typed is a kind's controller as it is written, for the state the kind's
// events carry (Deployments, Sentinels, Policies).
type typed[S any] interface {
	Apply(ctx context.Context, state S) error
	Delete(ctx context.Context, id string) error
	Present(ctx context.Context) ([]Placed, error)
}

func (s spec[S]) kindName() string { return s.name }

func (s spec[S]) idLabel() string { return s.label }

func (s spec[S]) placeOf(ev *ctrlv1.DeploymentChangeEvent) at { return s.at(s.state(ev)) }

func (s spec[S]) controller(d Deps) Controller { return controller[S]{spec: s, typed: s.build(d)} }

// controller adapts a typed controller to Controller: it takes the state
// out of the event.
type controller[S any] struct {
	spec  spec[S]
	typed typed[S]
}

func (c controller[S]) Kind() string { return c.spec.name }

func (c controller[S]) Apply(ctx context.Context, ev *ctrlv1.DeploymentChangeEvent) error {
	return c.typed.Apply(ctx, c.spec.state(ev))
}

func (c controller[S]) Delete(ctx context.Context, id string) error {
	return c.typed.Delete(ctx, id)
}

func (c controller[S]) Present(ctx context.Context) ([]Placed, error) {
	return c.typed.Present(ctx)
}
