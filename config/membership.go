package config

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
)

// validateMembership checks the keys of dynamic membership: the admin
// token and DNS discovery.
func (c *Config) validateMembership(p *problems) {
	if t := c.Auth.AdminToken; t != "" && (len(t) < 16 || strings.ContainsAny(t, " \t\r\n")) {
		p.add("auth.admin_token", "must be at least 16 characters without whitespace") // never print the token
	}
	d := c.Discovery.DNS
	p.interval("discovery.dns.interval", d.Interval)
	if d.Scheme != "http" && d.Scheme != "https" {
		p.add("discovery.dns.scheme", "must be http or https, got %q", d.Scheme)
	}
	p.atLeast("discovery.dns.remove_after", d.RemoveAfter, 1)
	if !slices.Contains(IPFamilies, d.IPFamily) {
		p.add("discovery.dns.ip_family", "must be one of %s, got %q", strings.Join(IPFamilies, ", "), d.IPFamily)
	}
	// A discovered worker obeys the rules of a workers[] entry.
	for _, e := range ValidateWorker(Worker{ID: "discovered", URL: "http://discovered", Models: d.Models,
		Engine: d.Engine, MaxRunning: d.MaxRunning, DPRanks: d.DPRanks, APIKey: d.APIKey}) {
		p.add("discovery.dns."+e.Path, "%s", e.Reason)
	}
	if d.Name == "" {
		return
	}
	if !validDNSName(d.Name) {
		p.add("discovery.dns.name", "is not a DNS name: %q", d.Name)
	}
	if strings.HasPrefix(d.Name, "_") {
		if d.Port != 0 {
			p.add("discovery.dns.port", "must be 0 with an SRV name (_service._proto.name): its records carry the ports, got %d", d.Port)
		}
	} else if d.Port < 1 || d.Port > 65535 {
		p.add("discovery.dns.port", "must be 1..65535 with an A/AAAA name, got %d", d.Port)
	}
	for i, w := range c.Workers {
		if IsDiscoveredID(w.ID) {
			p.add(fmt.Sprintf("workers[%d].id", i), "%q has the ip:port form of discovered workers' ids and could clash with discovery.dns", w.ID)
		}
	}
}

// IPFamilies are the values of discovery.dns.ip_family.
var IPFamilies = []string{"any", "ipv4", "ipv6"}

// IsDiscoveredID reports whether id has the form DNS discovery gives its
// workers: ip:port, IPv6 in brackets ("10.0.0.7:8000", "[fd00::7]:8000").
func IsDiscoveredID(id string) bool {
	host, _, err := net.SplitHostPort(id)
	return err == nil && net.ParseIP(host) != nil
}

// validDNSName accepts names of letters, digits, '-' and '_' in dot-separated
// labels of at most 63 bytes, 253 in all, with an optional final dot.
func validDNSName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// ChangedKeys lists, in declaration order, the key paths whose values differ
// between a and b. A list of entries (workers, admission.partitions) is one
// key. Values are never part of the answer, so it is safe to log.
func ChangedKeys(a, b Config) []string {
	var out []string
	changedKeys(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	return out
}

func changedKeys(a, b reflect.Value, prefix string, out *[]string) {
	for path, sf := range keyFields(a.Type(), prefix) {
		av, bv := a.FieldByIndex(sf.Index), b.FieldByIndex(sf.Index)
		if sf.Type.Kind() == reflect.Struct && sf.Type != durationType {
			changedKeys(av, bv, path, out)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			*out = append(*out, path)
		}
	}
}
