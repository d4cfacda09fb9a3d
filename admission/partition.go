package admission

import (
	"fmt"
	"math"
)

// Partition is a tenant: its share of the fleet is its weight over the sum
// of the weights of the partitions waiting. APIKeys select it (Resolver); the
// scheduler reads only Name and Weight and keeps no key.
type Partition struct {
	Name    string
	Weight  float64
	APIKeys []string
}

// validatePartitions checks the names and weights shared by the Resolver and
// the scheduler's Config.
func validatePartitions(parts []Partition, defaultPartition string) error {
	if len(parts) == 0 {
		return fmt.Errorf("admission: no partitions configured")
	}
	seen := make(map[string]bool, len(parts))
	for i, p := range parts {
		switch {
		case p.Name == "":
			return fmt.Errorf("admission: partitions[%d]: empty name", i)
		case seen[p.Name]:
			return fmt.Errorf("admission: partitions[%d]: duplicate name %q", i, p.Name)
		case !(p.Weight > 0) || math.IsInf(p.Weight, 0):
			return fmt.Errorf("admission: partitions[%d] (%q): weight must be a finite number > 0, got %v", i, p.Name, p.Weight)
		}
		seen[p.Name] = true
	}
	if !seen[defaultPartition] {
		return fmt.Errorf("admission: default partition %q is not among the partitions", defaultPartition)
	}
	return nil
}
