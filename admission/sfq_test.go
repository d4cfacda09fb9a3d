package admission

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStartTags(t *testing.T) {
	p := &partitionState{weight: 2}
	first := p.arrive(10, 100)
	assert.Equal(t, tags{start: 10, finish: 60, span: 50, arrivalV: 10, prevFinish: 0}, first, "an idle partition starts at V")
	second := p.arrive(10, 100)
	assert.Equal(t, 60.0, second.start, "a backlogged partition starts at its last finish")
	assert.Equal(t, 110.0, second.finish, "and advances by cost over weight")
	later := p.arrive(500, 20)
	assert.Equal(t, 500.0, later.start, "idle time banks no credit: back at V")
	assert.Equal(t, 510.0, p.lastFinish)
}
