package shardmerge

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Page gathers one listing page from the records whose keys a merge hands out, in key order:
// those that match the listing's bounds, up to Need of them.
type Page struct {
	bounds storekit.ListBounds
	// Need is how many records the page takes: Limit+1, the one past Limit telling that a
	// next page exists.
	Need int
	recs []idem.Record
}

// NewPage returns an empty page of a listing with bounds b.
func NewPage(b storekit.ListBounds) *Page {
	return &Page{bounds: b, Need: b.Limit + 1}
}

// Want is how many more records the page takes (Merge.Run's need).
func (p *Page) Want() int { return p.Need - len(p.recs) }

// Keep adds rec, the record of key, if it matches the bounds and the page takes more.
func (p *Page) Keep(key string, rec idem.Record) {
	if p.bounds.MatchRecord(&rec) && len(p.recs) < p.Need {
		p.recs = append(p.recs, rec)
	}
}

// Result returns the page of what was kept (storekit.ListBounds.Page).
func (p *Page) Result() idem.ListPage { return p.bounds.Page(p.recs) }
