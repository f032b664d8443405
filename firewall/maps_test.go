package firewall

import "github.com/kube-ipvs/kube-ipvs/model"

// Test helpers that show the packed API production uses (AppendMembers,
// Tracker.UpdateMembers, the Tracker read as DesiredSets) as plain maps of set name to
// entries, so that expectations read as "SET entry" lines.

// entriesOf returns the Service's entries, per set, as AppendMembers gives them.
func entriesOf(st *model.ServiceState, cfg Config) map[SetName]map[Entry]bool {
	return unpack(AppendMembers(nil, st, cfg))
}

func unpack(ms []Member) map[SetName]map[Entry]bool {
	out := map[SetName]map[Entry]bool{}
	for _, m := range ms {
		n := m.Set.Name()
		if out[n] == nil {
			out[n] = map[Entry]bool{}
		}
		out[n][m.Entry.Entry()] = true
	}
	return out
}

// pack turns every entry of the map (as entries builds it) into a member, as AppendMembers
// would give it.
func pack(entries map[SetName]map[Entry]bool) []Member {
	var ms []Member
	for n, es := range entries {
		for e := range es {
			ms = append(ms, Member{Set: IDOf(n), Entry: e.Pack()})
		}
	}
	return ms
}

// update records one Service's entries (nil: the Service is gone) as the IPVS dataplane
// does, through UpdateMembers with changes, and returns them.
func update(tr *Tracker, name model.ServiceName, entries map[SetName]map[Entry]bool) (add, del Changes) {
	return updateMany(tr, map[model.ServiceName]map[SetName]map[Entry]bool{name: entries})
}

// updateMany is update for several Services in one call: the changes are the net effect.
func updateMany(tr *Tracker, updates map[model.ServiceName]map[SetName]map[Entry]bool) (add, del Changes) {
	members := make(map[model.ServiceName][]Member, len(updates))
	for name, entries := range updates {
		members[name] = pack(entries)
	}
	return tr.UpdateMembers(members, true)
}

// desired reads every entry the Tracker wants through the view ipset.ResyncSets reads
// (Names, then Range per set).
func desired(tr *Tracker) map[SetName]map[Entry]bool {
	out := map[SetName]map[Entry]bool{}
	for _, n := range tr.Names() {
		tr.Range(n, func(p Packed) bool {
			if out[n] == nil {
				out[n] = map[Entry]bool{}
			}
			out[n][p.Entry()] = true
			return true
		})
	}
	return out
}

// changesLen is the number of entries in c.
func changesLen(c Changes) int {
	n := 0
	for _, es := range c {
		n += len(es)
	}
	return n
}
