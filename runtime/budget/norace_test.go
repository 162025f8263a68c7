//go:build !race

package budget

// simSeeds is how many seeds each fleet simulation scenario runs with.
const simSeeds = 3
