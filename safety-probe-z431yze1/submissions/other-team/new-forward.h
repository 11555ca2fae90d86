// another team's work
