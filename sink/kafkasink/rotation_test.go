package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinktest"
)

// TestACLRevokedWhileRunning denies the sink's user write access to its
// topic while the sink runs, as an ACL change gone wrong does, and lifts
// the denial again: publishes in between fail as unavailable (the message
// keeps its attempt), never permanent, and the same sink delivers after.
func TestACLRevokedWhileRunning(t *testing.T) {
	t.Parallel()
	allow := func(res kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	c := newCluster(t,
		kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin-pw"),
		kfake.User("PLAIN", "app", "app-pw",
			allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite),
			allow(kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLOperationWrite),
			allow(kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLOperationDescribe)),
		kfake.SeedTopics(1, "orders"))
	admin, err := kgo.NewClient(kgo.SeedBrokers(clusterAddr(c)),
		kgo.SASL(plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()))
	require.NoError(t, err)
	t.Cleanup(admin.Close)

	s := newSink(t, "kafka://app:app-pw@"+clusterAddr(c)+"?sasl=plain&topic=orders", nil)
	require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))

	denyWrite(t, admin)
	err = publish(t, s, sinktest.NewMessage("a"), 10*time.Second)
	require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
	require.False(t, outbox.IsPermanent(err))
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)

	liftDenials(t, admin)
	require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
}

func denyWrite(t *testing.T, admin *kgo.Client) {
	t.Helper()
	req := kmsg.NewPtrCreateACLsRequest()
	cr := kmsg.NewCreateACLsRequestCreation()
	cr.ResourceType, cr.ResourceName = kmsg.ACLResourceTypeTopic, "orders"
	cr.ResourcePatternType = kmsg.ACLResourcePatternTypeLiteral
	cr.Principal, cr.Host = "User:app", "*"
	cr.Operation, cr.PermissionType = kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeDeny
	req.Creations = append(req.Creations, cr)
	resp, err := req.RequestWith(context.Background(), admin)
	require.NoError(t, err)
	for _, r := range resp.Results {
		require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
	}
}

func liftDenials(t *testing.T, admin *kgo.Client) {
	t.Helper()
	req := kmsg.NewPtrDeleteACLsRequest()
	f := kmsg.NewDeleteACLsRequestFilter()
	f.ResourceType, f.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	f.Operation, f.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeDeny
	req.Filters = append(req.Filters, f)
	resp, err := req.RequestWith(context.Background(), admin)
	require.NoError(t, err)
	for _, r := range resp.Results {
		require.NoError(t, kerr.ErrorForCode(r.ErrorCode))
		require.NotEmpty(t, r.MatchingACLs, "the denial must have been lifted")
	}
}
