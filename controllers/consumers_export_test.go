package controllers

// BudgetsSelecting exposes budgetsSelecting to the benchmarks of the
// external test package, which needs devenv (and devenv imports this package).
var BudgetsSelecting = budgetsSelecting
