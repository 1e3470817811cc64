package ui

import (
	"embed"
	"fmt"
	"html/template"
)

// assets are the templates, the stylesheet and the script, built in.
//
//go:embed templates/*.html static/*
var assets embed.FS

// pages each have a template of their own, parsed with the layout.
var pageNames = []string{"runs", "run", "queues", "store", "error"}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}
