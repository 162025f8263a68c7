//go:build race

package budget

// simSeeds is how many seeds each fleet simulation scenario runs with. The
// race detector slows the simulation tenfold and finds the same races in one.
const simSeeds = 1
