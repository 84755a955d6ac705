package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestShardRanges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shards []int
		want   string
	}{
		{nil, ""},
		{[]int{5}, "5"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{0, 1, 3, 5, 6, 7, 15}, "0-1, 3, 5-7, 15"},
	} {
		require.Equal(t, tc.want, DispatcherView{Shards: tc.shards}.ShardRanges(), "%v", tc.shards)
	}
}
