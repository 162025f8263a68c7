package controllers

// BudgetsSelecting exposes budgetsSelecting to the benchmarks of the
// external test package, which needs testenv (and testenv imports this package).
var BudgetsSelecting = budgetsSelecting
