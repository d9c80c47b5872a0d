package limits

// MemoryWorkspaces reports how many workspaces m holds state for.
func MemoryWorkspaces(m *Memory) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ws)
}
